"""``python -m broker -c broker.conf``: see broker.startup."""

from broker.startup import main

raise SystemExit(main())
