"""``python -m gverify``: the gverify command."""

import sys

from .cli import main

sys.exit(main())
