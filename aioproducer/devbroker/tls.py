"""The secured mode's certificates: a test CA, broker and client certificates (and an
unrelated CA with a client certificate of its own) made with ``openssl``, as PEM files
(``TlsFiles``, ``make_tls_files``)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import ssl
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .common import BrokerStartError, _tail

BADHOST_NAME = "kafka.invalid"
"""The only name (DNS SAN) in the certificate of the ``SSL_BADHOST`` listener."""

CLIENT_KEY_PASSWORD = "client-key-secret"
_CLIENT_NAME = "alice"  # the client certificate's CN, mapped to the principal User:alice
_CERT_DAYS = "3650"

_OPENSSL_CNF = f"""\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[badhost]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:{BADHOST_NAME}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The PEM files of the secured mode (all in ``directory``). Keys are PKCS#8.

    - ``ca_file``: the test CA; it signed every certificate below but the ``other_*``.
    - ``broker_keystore``: the brokers' key + certificate (SAN IP:127.0.0.1 and
      DNS:localhost) + CA; ``badhost_keystore``: the same for ``SSL_BADHOST``, whose
      certificate names only ``kafka.invalid``.
    - ``client_cert`` / ``client_key``: a client certificate (CN=alice, so the principal
      on the ``MTLS`` listener is ``User:alice``); ``client_key_encrypted`` is that key
      encrypted with ``client_key_password`` (AES-256); ``client_chain`` is the key, the
      certificate and the CA in one file.
    - ``other_ca_file``: an unrelated CA (verifying the brokers with it fails);
      ``other_client_cert``/``other_client_key``: a client certificate it signed (the
      ``MTLS`` listener refuses it).
    """

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker-keystore.pem"

    @property
    def badhost_keystore(self) -> Path:
        return self.directory / "badhost-keystore.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    @property
    def client_key_encrypted(self) -> Path:
        return self.directory / "client-encrypted.key"

    @property
    def client_key_password(self) -> str:
        return CLIENT_KEY_PASSWORD

    @property
    def client_chain(self) -> Path:
        return self.directory / "client-chain.pem"

    @property
    def other_ca_file(self) -> Path:
        return self.directory / "other-ca.pem"

    @property
    def other_client_cert(self) -> Path:
        return self.directory / "other-client.pem"

    @property
    def other_client_key(self) -> Path:
        return self.directory / "other-client.key"

    def exists(self) -> bool:
        return all(p.is_file() for p in (
            self.ca_file, self.broker_keystore, self.badhost_keystore, self.client_cert,
            self.client_key, self.client_key_encrypted, self.client_chain,
            self.other_ca_file, self.other_client_cert, self.other_client_key))

    def ssl_context(self, *, client_cert: bool = False,
                    check_hostname: bool = True) -> ssl.SSLContext:
        """A client-side ``ssl.SSLContext`` that trusts ``ca_file`` (and presents the
        client certificate with ``client_cert``)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.check_hostname = check_hostname
        if client_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def _openssl(args: Sequence[str], cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise BrokerStartError("the secured mode makes its certificates with 'openssl', "
                               "which is not on PATH (on Debian/Ubuntu: apt-get install "
                               "openssl)")
    done = subprocess.run([openssl, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise BrokerStartError(f"openssl {shlex.join(args)} failed (exit {done.returncode})",
                               _tail(done.stderr + done.stdout, 20))


def make_tls_files(directory: str | os.PathLike[str]) -> TlsFiles:
    """Make (afresh) the secured mode's CAs, keys and certificates with ``openssl``
    into ``directory``; see ``TlsFiles``. EC P-256 keys, valid for ten years."""
    files = TlsFiles(Path(directory).absolute())
    d = files.directory
    d.mkdir(parents=True, exist_ok=True)
    cnf = d / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)

    def key(name: str) -> None:
        _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-out", name], d)

    def ca(name: str, cn: str) -> None:
        key(f"{name}.key")
        _openssl(["req", "-new", "-x509", "-config", cnf.name, "-extensions", "ca",
                  "-key", f"{name}.key", "-subj", f"/CN={cn}", "-days", _CERT_DAYS,
                  "-sha256", "-out", f"{name}.pem"], d)

    def leaf(name: str, cn: str, extensions: str, issuer: str) -> None:
        key(f"{name}.key")
        _openssl(["req", "-new", "-config", cnf.name, "-key", f"{name}.key",
                  "-subj", f"/CN={cn}", "-out", f"{name}.csr"], d)
        _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem",
                  "-CAkey", f"{issuer}.key", "-set_serial", f"0x{os.urandom(12).hex()}",
                  "-days", _CERT_DAYS, "-sha256", "-extfile", cnf.name,
                  "-extensions", extensions, "-out", f"{name}.pem"], d)
        (d / f"{name}.csr").unlink()

    ca("ca", "aioproducer test CA")
    ca("other-ca", "aioproducer unrelated test CA")
    leaf("broker", "localhost", "broker", "ca")
    leaf("badhost", BADHOST_NAME, "badhost", "ca")
    leaf("client", _CLIENT_NAME, "client", "ca")
    leaf("other-client", _CLIENT_NAME, "client", "other-ca")
    _openssl(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "client.key",
              "-out", files.client_key_encrypted.name,
              "-passout", f"pass:{CLIENT_KEY_PASSWORD}"], d)
    ca_pem = files.ca_file.read_text()
    for name, target in (("broker", files.broker_keystore),
                         ("badhost", files.badhost_keystore),
                         ("client", files.client_chain)):
        target.write_text((d / f"{name}.key").read_text() + (d / f"{name}.pem").read_text()
                          + ca_pem)
    for path in d.iterdir():
        if path.suffix == ".key":
            path.chmod(0o600)
    return files
