"""An example production inventory: copy it and list your own hosts.

    pyinfra inventories/prod.py deploy.py            # shows the plan, asks before changing
    pytest verify/ --hosts=ssh://admin@gpu-sxm-01,...

Each list is a group; its settings go in group_data/<group>.py. Every host is also in the group
`prod` (this file's name) and in `all` (group_data/all.py holds every default).
"""

v100_sxm2 = [
    ("gpu-sxm-01.example.internal", {"ssh_user": "admin"}),
    ("gpu-sxm-02.example.internal", {"ssh_user": "admin"}),
]
