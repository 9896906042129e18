"""frontdoor: HAProxy (the distribution's package) on vllm_port of a host serving a layout,
balancing over its vLLM instances (llmfleet/frontdoor.py renders the configuration): install,
configure, activate. It runs after the vllm component: on a host moving to a layout, that one
has stopped vllm.service, whose port the front door takes; a changed configuration is reloaded
(Debian's haproxy.service checks it first, `haproxy -c`, and keeps the running one if it is bad).
After a start or a reload the deploy waits until the front door's checks have every instance UP,
so a host is served when its deploy ends.
"""


from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server, systemd

from llmfleet import frontdoor, vllm_layout
from llmfleet.settings import Settings
from operations import apt_installed, managed_files


@deploy("frontdoor")
def configure(settings: Settings):
    """The front door, on a serving host with a layout; none without one."""
    if not settings.vllm_enabled or vllm_layout.instances(settings) is None:
        host.noop("frontdoor: no vllm_layout on this host: clients reach vllm.service on vllm_port itself")
        return
    # install
    apt_installed("frontdoor: haproxy is installed", [frontdoor.PACKAGE], settings.apt_cache_valid_s,
                  no_recommends=True)
    # configure
    config = managed_files.put("frontdoor: haproxy.cfg balances over the layout's instances", frontdoor.CONFIG_PATH,
                               frontdoor.render_config(settings, vllm_layout.instances(settings)))
    # activate
    service = systemd.service(name="frontdoor: haproxy is enabled and running", service=frontdoor.SERVICE,
                              running=True, enabled=True, reloaded=config.will_change)
    if config.will_change or service.will_change:
        server.shell(name="frontdoor: every instance UP in its checks (clients are served when the deploy ends)",
                     commands=[frontdoor.admin_command("serving", str(frontdoor.up_wait_s(settings)))])
