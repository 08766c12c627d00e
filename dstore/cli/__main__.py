"""``python -m dstore.cli``: the same program as the ``dstore`` command."""

import sys

from . import main

sys.exit(main())
