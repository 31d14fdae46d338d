"""``python -m nameserver``: see nameserver.startup."""

from nameserver.startup import main

raise SystemExit(main())
