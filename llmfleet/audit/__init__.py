"""Fleet drift audits (`llmfleet audit`; onboarding, `llmfleet onboard`, is llmfleet/onboard.py).

- ``model``: a Problem (host, kind, what, expected, actual, repair; its check id) and how values read.
- ``testinfra``: testinfra URLs for inventory hosts (hosts and their data: llmfleet/inventory.py).
- ``fingerprint``: the hardware fingerprint recorded at onboarding, and its comparison.
- ``config_drift``: the deploy's dry-run plan, per host.
- ``state_drift``: the verify suite, one pytest process per host, in parallel.
- ``waivers``: accepted problems with a reason and an expiry date.
- ``report``: terminal, JSON, JUnit XML and HTML; what changed since the last audit.
- ``run``: the audit from start to exit status (0 clean, 1 drift, 2 could not run).
"""
