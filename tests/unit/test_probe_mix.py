"""`llmfleet probe mix`: a mix learnt from a request log by k-means on its lengths. A synthetic log
with five known clusters (the shares of probe_mix in group_data/all.py) gets them back."""

from __future__ import annotations

import json
import math
import random

import pytest

from llmfleet.probe import mix
from llmfleet.probe.config import ProbeError, RequestClass, mix_problems

# (share, prompt centre, output centre, temperature) of five clusters, lengths log-normal around them
KNOWN = [(0.22, 60, 30, 0.7), (0.31, 300, 120, 0.7), (0.28, 1000, 250, 0.2), (0.15, 2800, 500, 0.0),
         (0.04, 6000, 800, 0.0)]


def synthetic_log(path, n=2000, seed=7):
    rng = random.Random(seed)
    lines, t = [], 0.0
    for _ in range(n):
        share, p, o, temp = rng.choices(KNOWN, [k[0] for k in KNOWN])[0]
        t += rng.expovariate(10)
        lines.append(json.dumps({"arrival_s": round(t, 3), "prompt_tokens": max(1, round(rng.lognormvariate(
            math.log(p), 0.15))), "output_tokens": max(1, round(rng.lognormvariate(math.log(o), 0.15))),
            "temperature": temp}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_five_known_clusters_come_back_with_their_shares_ranges_and_sampling(tmp_path):
    learnt = mix.learn(synthetic_log(tmp_path / "log.jsonl"), 5)
    assert [c.name for c in learnt.mix] == ["very_short", "short", "medium", "long", "very_long"]
    assert mix_problems(learnt.mix) == [] and sum(learnt.counts) == 2000
    for c, (share, p, o, temp), (cp, co) in zip(learnt.mix, KNOWN, learnt.centres, strict=True):
        assert c.share == pytest.approx(share, abs=0.03), c
        assert c.prompt_tokens.min < p < c.prompt_tokens.max and c.output_tokens.min < o < c.output_tokens.max, c
        assert cp == pytest.approx(p, rel=0.05) and co == pytest.approx(o, rel=0.05)
        assert c.temperature == temp
    # neighbouring classes' prompt ranges do not overlap: the clusters were told apart
    for a, b in zip(learnt.mix, learnt.mix[1:], strict=False):
        assert a.prompt_tokens.max < b.prompt_tokens.min


def test_the_proposal_is_group_data_and_a_mix_file_that_validate(tmp_path):
    import yaml

    learnt = mix.learn(synthetic_log(tmp_path / "log.jsonl", n=500), 3)
    scope: dict = {}
    exec(mix.as_group_data(learnt), scope)  # noqa: S102 - the text is what an operator pastes into group data
    assert [RequestClass.model_validate(c) for c in scope["probe_mix"]] == learnt.mix
    assert [RequestClass.model_validate(c) for c in yaml.safe_load(mix.as_yaml(learnt))] == learnt.mix
    assert "# 500 requests" not in mix.as_group_data(learnt) and "requests, median" in mix.as_group_data(learnt)


def test_a_mooncake_trace_is_a_log_too(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 100 + (i % 2) * 900,
                                     "output_length": 10 + (i % 2) * 200, "hash_ids": [i] if i % 2 == 0 else
                                     [i, i + 1]}) + "\n" for i in range(20)))
    learnt = mix.learn(p, 2)
    assert learnt.fmt == "mooncake" and [c.share for c in learnt.mix] == [0.5, 0.5]
    assert learnt.mix[0].prompt_tokens.max == 100 and learnt.mix[1].prompt_tokens.min == 1000
    assert learnt.mix[0].temperature == 0.0  # no sampling settings in the log: the class default


def test_a_log_that_cannot_give_the_classes_asked_says_so(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n2,20,5\n")
    with pytest.raises(ProbeError, match=r"--classes 5, but the log holds only 2 distinct \(prompt, output\) lengths "
                                         r"in 3 requests \(fix: --classes 2 or fewer"):
        mix.learn(p, 5)
    p.write_text("arrival_s,prompt,output_tokens\n0,hello,5\n")
    with pytest.raises(ProbeError, match="have a prompt but no prompt_tokens"):
        mix.learn(p, 1)
