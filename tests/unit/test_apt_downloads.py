"""apt's download bounds (mirrors component): group data to a valid drop-in, bad values named."""

import pytest
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from test_settings import all_defaults

from llmfleet.settings import SettingsError, validate
from llmfleet.templates import TEMPLATES


def rendered(**overrides) -> str:
    s = validate("gpu-1", all_defaults() | overrides)
    env = Environment(loader=FileSystemLoader(str(TEMPLATES / "mirrors")), undefined=StrictUndefined)
    return env.get_template("apt-acquire.conf.j2").render(timeout_s=s.apt_http_timeout_s, retries=s.apt_retries,
                                                          pipeline_depth=s.apt_http_pipeline_depth,
                                                          lock_timeout_s=s.apt_lock_timeout_s)


def test_the_drop_in_carries_the_group_data_values():
    text = rendered(apt_http_timeout_s=45, apt_retries=5, apt_http_pipeline_depth=2, apt_lock_timeout_s=90)
    lines = [ln for ln in text.splitlines() if not ln.startswith("//")]
    assert lines == ['Acquire::http::Timeout "45";', 'Acquire::https::Timeout "45";', 'Acquire::Retries "5";',
                      'Acquire::http::Pipeline-Depth "2";', 'DPkg::Lock::Timeout "90";']


def test_the_defaults_keep_apts_pipelining_and_bound_a_silent_connection():
    text = rendered()
    assert 'Acquire::http::Pipeline-Depth "10";' in text and 'Acquire::http::Timeout "30";' in text


@pytest.mark.parametrize("key,value,fragment", [
    ("apt_http_timeout_s", 0, "greater than 0"),
    ("apt_http_timeout_s", "30", "integer"),
    ("apt_retries", -1, "greater than or equal to 0"),
    ("apt_retries", 11, "less than or equal to 10"),
    ("apt_http_pipeline_depth", 11, "less than or equal to 10"),
    ("apt_http_pipeline_depth", 1.5, "integer"),
    ("apt_lock_timeout_s", -5, "greater than or equal to 0"),
    ("apt_lock_timeout_s", "300", "integer"),
])
def test_bad_download_bounds_are_named_with_host_and_value(key, value, fragment):
    with pytest.raises(SettingsError) as exc:
        validate("gpu-2", all_defaults() | {key: value})
    msg = str(exc.value)
    assert msg.startswith("host gpu-2:") and f"{key} = {value!r}" in msg and fragment in msg, msg
