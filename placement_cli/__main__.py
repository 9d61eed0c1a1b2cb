"""``python -m placement_cli ...`` is the ``placement`` command."""

import sys

from .main import main

sys.exit(main())
