"""Converge a host to the state group_data/ describes.

    pyinfra inventories/lab.py deploy.py -y
    pyinfra inventories/prod.py deploy.py

Settings are validated first: invalid group data stops the deploy before any host is touched.
"""

from pyinfra import host

from llmfleet.settings import settings_for
from operations import base_packages, mirrors

settings = settings_for(host)

mirrors.configure(settings)
base_packages.install(settings)
