"""Fleet-wide group data: what this fleet sets differently from llmfleet's defaults, for every host.

Every setting, its type, its default and its documentation are declared once, in
``llmfleet/schema.py`` (a section a component); ``docs/settings.md`` lists them all, rendered from it
(``make settings-doc``). A setting left out here, in a group's file (``group_data/<group>.py``) or in
the inventory takes its default. A deploy stops before touching any host when a value is not valid.
"""

# Log in as an unprivileged account and use sudo (pyinfra global argument). A fleet that logs in
# as root may set this to False.
_sudo = True
