"""python -m controller: mqcontroller."""

import sys

from controller.startup import main

sys.exit(main())
