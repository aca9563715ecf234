"""``python -m aioproducer.devbroker ...``: the broker's command line (see ``cli``)."""

import sys

from .cli import main

sys.exit(main())
