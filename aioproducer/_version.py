"""The package's version, in one place: pyproject.toml reads it
(``[tool.setuptools.dynamic]``), and the package, the ``aioproducer`` command, the
OpenTelemetry scope, the KIP-714 push and ApiVersions' client software version import
it from here. A leaf module: it imports nothing, so reading it builds nothing."""

__version__ = "0.1.0"
