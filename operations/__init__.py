"""llmfleet's pyinfra operations: one module per component, named for the state it ensures.

Each component reads its settings (validated, see llmfleet/settings.py), renders its templates
from ``templates/<component>/`` and is verified by ``verify/test_<component>.py``.
"""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def template(component: str, name: str) -> str:
    return str(TEMPLATES / component / name)
