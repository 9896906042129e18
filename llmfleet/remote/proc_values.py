"""Run on a host by the verify suite: each path in argv (a /proc/sys or /sys file) as
{path: [its stripped content, or None when it does not exist; whether this process may write it]}."""

import json
import os
import sys

print(json.dumps({p: [open(p).read().strip() if os.path.exists(p) else None, os.access(p, os.W_OK)]
                  for p in sys.argv[1:]}))
