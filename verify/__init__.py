"""The verify suite: testinfra checks of every component, run against hosts
(`pytest verify/ --hosts=... [--inventory inventories/X.py]`). A package, so that pytest puts the
repository root on sys.path (its default import mode) and the checks import `verify.helpers`
and `llmfleet` from a plain checkout."""
