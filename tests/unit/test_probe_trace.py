"""Request logs: the simple format (JSONL, CSV) and Mooncake's, each bad record refused with its line;
a replay's schedule keeps the log's timing (scaled by speed), its shared hash ids become shared
prompt prefixes; shared prefixes of a class on purpose."""

from __future__ import annotations

import pytest

from llmfleet.probe import load, trace
from llmfleet.probe.config import ProbeConfig, ProbeError
from llmfleet.probe.prompts import PromptMaker, load_tokenizer

MIX = [{"name": "chat", "share": 1.0, "prompt_tokens": [40, 60], "output_tokens": [4, 8], "temperature": 0.3,
        "slo": {"ttft_p95_ms": 200}}]
CFG = ProbeConfig(mix=MIX, slo={"e2e_p95_ms": 1000}, check_rps=1)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from llmfleet.lab.tiny_model import _tokenizer_files

    folder = tmp_path_factory.mktemp("tok")
    _tokenizer_files(folder)
    return load_tokenizer(folder)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_simple_jsonl_and_csv_are_read_in_arrival_order(tmp_path):
    j = write(tmp_path, "t.jsonl", '{"arrival_s": 2.0, "prompt_tokens": 10, "output_tokens": 5, "class": "chat"}\n'
                                   '\n{"arrival_s": 1.5, "prompt": "hello there", "output_tokens": 3, '
                                   '"temperature": 0.9, "top_p": 0.5}\n')
    fmt, rs = trace.read(j)
    assert fmt == "simple" and [r.line for r in rs] == [3, 1]
    assert (rs[0].prompt, rs[0].temperature, rs[0].top_p, rs[1].cls) == ("hello there", 0.9, 0.5, "chat")
    c = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens,class\n0.5,10,5,\n0.25,12,6,chat\n")
    fmt, rs = trace.read(c)
    assert fmt == "simple" and [(r.line, r.prompt_tokens, r.cls) for r in rs] == [(3, 12, "chat"), (2, 10, None)]


@pytest.mark.parametrize(("text", "message"), [
    ('{"arrival_s": 0, "prompt_tokens": 5}\n', "t.jsonl:1: output_tokens is missing"),
    ('{"arrival_s": 0, "output_tokens": 5}\n', "t.jsonl:1: neither prompt_tokens nor prompt"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 0}\n', "t.jsonl:1: output_tokens = 0: must be at least 1"),
    ('{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 2}\n', "arrival_s = -1: must be at least 0"),
    ('{"arrival_s": 0, "prompt_tokens": 5.5, "output_tokens": 2}\n', "prompt_tokens = 5.5: not an integer"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "temp": 1}\n', "unknown field(s) temp"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\nnot json\n', "t.jsonl:2: not a JSON object"),
    ('[1, 2]\n', "t.jsonl:1: expected a JSON object, got list"),
    ('', "no requests in it"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n',
     "input_length = 600 does not fit 1 hash ids of 512 tokens"),
    ('{"timestamp": 0, "input_length": 60, "output_length": 5, "hash_ids": ["a"]}\n', "not a list of integers"),
])
def test_a_bad_record_is_refused_with_its_line_field_and_value(tmp_path, text, message):
    with pytest.raises(ProbeError, match=None) as exc:
        trace.read(write(tmp_path, "t.jsonl", text))
    assert message in str(exc.value)


def test_a_replay_keeps_the_logs_timing_scaled_by_speed(tmp_path):
    p = write(tmp_path, "t.jsonl", "".join(f'{{"arrival_s": {100 + t}, "prompt_tokens": 8, "output_tokens": 2}}\n'
                                           for t in (0, 0.5, 0.75, 3.0, 4.0)))
    _, rs = trace.read(p)
    planned = trace.plan(rs, CFG, PromptMaker(seed=1), speed=2.0)
    # the log's gaps halved; the first request one mean gap (2.0 s / 4) after the start
    assert [round(x.intended_s, 6) for x in planned] == [0.5, 0.75, 0.875, 2.0, 2.5]
    start, end = load.span(planned)
    assert 5 / (end - start) == pytest.approx(4 / 2.0)  # the rate: (n - 1) / the log's span at 2x
    assert all(x.measured for x in planned) and {x.cls for x in planned} == {"trace"}
    assert all(x.temperature == 0.0 for x in planned)  # no class, no sampling settings: greedy
    warm = trace.plan(rs, CFG, PromptMaker(seed=1), speed=1.0, warmup_s=1.0, requests=4)
    assert [x.measured for x in warm] == [False, False, False, True]


def test_a_class_named_in_the_log_brings_its_sampling_settings(tmp_path):
    p = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens,class\n0,8,2,chat\n1,8,2,other\n")
    _, rs = trace.read(p)
    a, b = trace.plan(rs, CFG, PromptMaker(seed=1))
    assert (a.cls, a.temperature, b.cls, b.temperature) == ("chat", 0.3, "other", 0.0)


def test_mooncake_hash_ids_become_shared_prompt_prefixes(tmp_path, tokenizer):
    p = write(tmp_path, "m.jsonl",
              '{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}\n'
              '{"timestamp": 250, "input_length": 600, "output_length": 7, "hash_ids": [0, 2]}\n'
              '{"timestamp": 1000, "input_length": 100, "output_length": 3, "hash_ids": [3]}\n')
    fmt, rs = trace.read(p)
    assert fmt == "mooncake" and [r.arrival_s for r in rs] == [0, 0.25, 1.0]
    maker = PromptMaker(tokenizer, seed=4)
    a, b, c = trace.plan(rs, CFG, maker)
    ta, tb = tokenizer.encode(a.prompt).ids, tokenizer.encode(b.prompt).ids
    shared = next(i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y)
    assert shared >= 510  # block 0 (512 tokens) is the same text in both; a token or two may merge at its end
    assert abs(len(ta) - 700) <= 3 and abs(len(tb) - 600) <= 3 and abs(len(tokenizer.encode(c.prompt).ids) - 100) <= 3
    assert (a.prompt_tokens, a.output_tokens, b.output_tokens) == (700, 5, 7)


def test_a_trace_too_long_for_the_served_context_is_named_before_any_load(tmp_path):
    p = write(tmp_path, "t.jsonl", '{"arrival_s": 0, "prompt_tokens": 1000, "output_tokens": 100}\n'
                                   '{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 10}\n')
    _, rs = trace.read(p)
    [msg] = trace.length_problems(rs, 1024, "h: --trace t.jsonl")
    assert msg.startswith("h: --trace t.jsonl: 1 of 2 requests need more than the served max_model_len 1024 "
                          "tokens: line 1 (1000 + 100)")


def test_a_class_can_share_a_prompt_prefix_on_purpose_and_by_default_none_is_shared(tokenizer):
    mix = [{**MIX[0], "shared_prefix_tokens": 32}]
    c = ProbeConfig(mix=mix, slo={"e2e_p95_ms": 1000}, check_rps=1, duration_s=5, warmup_s=0, min_requests=1)
    planned = load.plan(c, 2.0, PromptMaker(tokenizer, seed=1), seed=1)
    ids = [tokenizer.encode(x.prompt).ids for x in planned]
    assert all(i[:31] == ids[0][:31] for i in ids)  # the class's prefix
    assert len({tuple(i[33:40]) for i in ids}) == len(ids)  # then each its own
    assert all(abs(len(i) - x.prompt_tokens) <= 2 for i, x in zip(ids, planned, strict=True))
    plain = load.plan(CFG, 2.0, PromptMaker(tokenizer, seed=1), seed=1)
    assert len({tokenizer.encode(x.prompt).ids[0] for x in plain}) > 1
    with pytest.raises(ValueError, match="shared_prefix_tokens = 40 is not below prompt_tokens.min 40"):
        ProbeConfig(mix=[{**MIX[0], "shared_prefix_tokens": 40}], slo={"e2e_p95_ms": 1}, check_rps=1)
