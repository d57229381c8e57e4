"""``python -m gdemos``: the same as the ``gdemos`` console script."""

import sys

from .cli import main

sys.exit(main())
