"""Settings for the lab's fleet gateway hosts (group `lab_gateways`, `llmfleet lab up --gateways 1`):
containers running HAProxy in front of the serving containers (llmfleet/gateway.py)."""

# a gateway host serves no model itself (llmfleet/gateway.py refuses one that does)
vllm_enabled = False
# the gateway is checked by the control machine's verify (verify/test_gateway.py); its self-audit every
# minute would take a share of the 2 cores the serving containers prove the self-audit on
self_audit_enabled = False
