"""``python -m unillm.cli``: the ``unillm`` command."""

import sys

from unillm.cli.main import main

sys.exit(main())
