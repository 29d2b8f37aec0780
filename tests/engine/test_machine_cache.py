"""This machine's measured costs are kept between runs, keyed by what they depend on, re-measured when any of it
changes, and never the reason a run fails; a kept choice decodes the same tokens as a fresh one."""

import copy
import itertools
import json
import logging

import pytest
import torch

from ssd_demo import DecodingConfig, speculative_generate
from ssd_demo.engine import calibration, kernels, machine_cache, onnx_forward
from ssd_demo.engine.calibration import StepCosts
from support.tiny_models import tiny_llama


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache in a folder of this test's own (the session's default is off), read afresh."""
    monkeypatch.setenv(machine_cache.CACHE_ENV, str(tmp_path / "cache"))
    machine_cache.forget_read()
    yield tmp_path / "cache"
    machine_cache.forget_read()


def _new_process():
    """What a new run starts with: nothing measured in memory (the file is read again)."""
    machine_cache.forget_read()


def test_the_folder_follows_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("SSD_DEMO_CACHE", "off")
    assert machine_cache.folder() is None
    monkeypatch.setenv("SSD_DEMO_CACHE", str(tmp_path))
    assert machine_cache.folder() == tmp_path
    monkeypatch.delenv("SSD_DEMO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert machine_cache.folder() == tmp_path / "xdg" / "ssd_demo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert machine_cache.folder() == tmp_path / "home" / ".cache" / "ssd_demo"


def test_kept_values_are_read_back_in_a_new_run_and_only_on_the_same_machine(cache, monkeypatch):
    machine_cache.put("kind", "model", 2, {"answer": 1})
    _new_process()
    assert machine_cache.get("kind", "model", 2) == {"answer": 1}
    assert machine_cache.get("kind", "model", 1) is None  # another thread count
    [path] = cache.glob("machine-*.json")
    assert json.loads(path.read_text())["machine"]["torch"] == torch.__version__.split("+")[0]
    monkeypatch.setattr(machine_cache, "_version", lambda package: "0.0.1")  # new library versions: another file
    _new_process()
    assert machine_cache.get("kind", "model", 2) is None


def test_off_and_refresh(cache, monkeypatch):
    machine_cache.put("kind", "key", {"answer": 1})
    monkeypatch.setenv("SSD_DEMO_CACHE", "refresh")  # measured again: nothing read, what is measured overwrites
    _new_process()
    assert machine_cache.get("kind", "key") is None
    monkeypatch.setenv("SSD_DEMO_CACHE", "off")
    machine_cache.put("kind", "key", {"answer": 2})  # nothing written anywhere
    assert machine_cache.get("kind", "key") is None
    monkeypatch.setenv("SSD_DEMO_CACHE", str(cache))
    _new_process()
    assert machine_cache.get("kind", "key") == {"answer": 1}


def test_a_damaged_file_is_ignored_with_one_warning_and_replaced(cache, caplog):
    machine_cache.put("kind", "key", {"answer": 1})
    [path] = cache.glob("machine-*.json")
    path.write_text('{"machine": {"format": 1}, "entr')  # cut short
    _new_process()
    with caplog.at_level(logging.WARNING, logger=machine_cache.__name__):
        assert machine_cache.get("kind", "key") is None
        machine_cache.put("kind", "key", {"answer": 2})
    assert "could not be read" in caplog.text and "as if there were no cache" in caplog.text
    _new_process()
    assert machine_cache.get("kind", "key") == {"answer": 2}


def test_an_unwritable_folder_is_a_warning_not_a_failure(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SSD_DEMO_CACHE", str(blocker / "cache"))
    _new_process()
    with caplog.at_level(logging.WARNING, logger=machine_cache.__name__):
        machine_cache.put("kind", "key", {"answer": 1})
        assert machine_cache.graph("g", lambda: b"built") == b"built"
    assert "could not be written" in caplog.text
    _new_process()


def test_the_signature_is_the_shapes_not_the_values():
    a, b = tiny_llama(seed=1, vocab=50, layers=2, width=32), tiny_llama(seed=2, vocab=50, layers=2, width=32)
    assert machine_cache.signature(a) == machine_cache.signature(b)  # other values: the same costs
    assert machine_cache.signature(a) != machine_cache.signature(tiny_llama(seed=1, vocab=50, layers=3, width=32))
    assert machine_cache.signature(a) != machine_cache.signature(copy.deepcopy(a).to(torch.bfloat16))
    assert machine_cache.digest(*a.parameters()) != machine_cache.digest(*b.parameters())  # a graph's key: values


def test_a_graph_is_built_once_checked_on_reading_and_rebuilt_when_damaged(cache, caplog):
    built = []
    assert machine_cache.graph("k", lambda: built.append(1) or b"graph bytes") == b"graph bytes"
    _new_process()
    assert machine_cache.graph("k", lambda: built.append(1) or b"graph bytes") == b"graph bytes" and built == [1]
    (cache / "graphs" / "k.onnx").write_bytes(b"graph bytez")
    with caplog.at_level(logging.WARNING, logger=machine_cache.__name__):
        assert machine_cache.graph("k", lambda: built.append(1) or b"graph bytes") == b"graph bytes"
    assert built == [1, 1] and "damaged" in caplog.text


def test_old_graphs_are_removed_beyond_the_limit(cache, monkeypatch):
    monkeypatch.setattr(machine_cache, "MAX_GRAPHS", 2)
    for key in "abc":
        machine_cache.graph(key, lambda: key.encode())
        machine_cache._prune(cache / "graphs", keep=2)
    assert len(list((cache / "graphs").glob("*.onnx"))) == 2


def _timed_choice(monkeypatch, answers):
    timed = []
    monkeypatch.setattr(onnx_forward, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(onnx_forward, "_probe_threads", lambda model: (1, ""))
    monkeypatch.setattr(onnx_forward, "time_forwards",
                        lambda model, threads=None, against_one_thread=False: timed.append(1) or next(answers))
    return timed


def test_the_forward_choice_is_timed_once_per_machine(cache, monkeypatch):
    timed = _timed_choice(monkeypatch, itertools.repeat({1: (5.0, 3.0)}))
    first = onnx_forward.choice(tiny_llama(seed=3, vocab=50, layers=2, width=32))
    assert first.serves and not first.kept and len(timed) == 2
    _new_process()
    again = onnx_forward.choice(tiny_llama(seed=4, vocab=50, layers=2, width=32))  # a new model of the same shapes
    assert again == first and again.kept and len(timed) == 2
    assert "timed in an earlier run on this machine" in onnx_forward.describe(tiny_llama(seed=4, vocab=50, layers=2,
                                                                                          width=32))
    torch.set_num_threads(2)  # another thread count: timed
    onnx_forward.choice(tiny_llama(seed=5, vocab=50, layers=2, width=32))
    assert len(timed) == 4


def test_probes_that_disagree_are_not_kept(cache, monkeypatch):
    timed = _timed_choice(monkeypatch, iter([{1: (5.0, 3.0)}, {1: (3.0, 5.0)}, {1: (5.0, 3.0)}, {1: (5.0, 3.0)}]))
    assert not onnx_forward.choice(tiny_llama(seed=3, vocab=50, layers=2, width=32)).serves
    _new_process()
    assert onnx_forward.choice(tiny_llama(seed=3, vocab=50, layers=2, width=32)).serves and len(timed) == 4


def test_the_kernel_choice_is_timed_once_per_machine(cache, monkeypatch):
    probes = []
    monkeypatch.setattr(kernels, "PROBE_MIN_PARAMETERS", 0)
    monkeypatch.setattr(kernels, "measure_kernel_threshold", lambda model, repeats=7: probes.append(1) or 4)
    first = kernels.kernel_choice(tiny_llama(seed=3, vocab=50, layers=2, width=32))
    _new_process()
    again = kernels.kernel_choice(tiny_llama(seed=4, vocab=50, layers=2, width=32))
    assert again == first and again.kept and first.onednn_from == 4 and len(probes) == 2  # one probe of two, kept


def test_the_costs_are_measured_once_per_machine_and_again_for_another_forward(cache, monkeypatch):
    measured = []
    costs = StepCosts(draft=0.2, verify=tuple(1.0 + 0.1 * k for k in range(calibration.MAX_DRAFT_LEN + 1)),
                      target_step_seconds=0.003, kernels="k", measured_verify=((1, 1.1), (2, 1.2)))
    monkeypatch.setattr(calibration, "measure_costs", lambda target, draft: measured.append(1) or costs)
    pair = lambda seed: (tiny_llama(seed=seed, vocab=50, layers=2, width=32),  # noqa: E731
                         tiny_llama(seed=seed + 1, vocab=50, layers=1, width=32))
    assert calibration.calibrated_costs(*pair(1)) == costs and len(measured) == 1
    _new_process()
    assert calibration.calibrated_costs(*pair(3)) == costs and len(measured) == 1
    monkeypatch.setenv("SSD_DEMO_STATIC_CACHE", "0")  # transformers' forward serves now: other costs
    calibration.calibrated_costs(*pair(5))
    assert len(measured) == 2


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_kept_choice_and_graph_decode_the_same_tokens_as_a_fresh_measurement(cache, monkeypatch, temperature):
    """A second run reads the choice and the graph; a first run times and builds them: same forward, same tokens."""
    _timed_choice(monkeypatch, itertools.repeat({1: (5.0, 3.0)}))  # ONNX Runtime serves both: its graphs are kept too
    target = tiny_llama(seed=11, vocab=64, layers=2, width=64, heads=4, kv_heads=2, init=0.3)
    draft = tiny_llama(seed=12, vocab=64, layers=1, width=32, heads=2, kv_heads=1, init=0.3)
    prompt = torch.tensor([[1, 5, 7, 9]])
    config = DecodingConfig(max_new_tokens=40, temperature=temperature, seed=3, draft_len=3, eos_token_id=None)
    fresh = speculative_generate(target, draft, prompt, config)
    choices = (onnx_forward.choice(target), onnx_forward.choice(draft))
    assert not any(c.kept for c in choices)
    _new_process()
    target2, draft2 = copy.deepcopy(target), copy.deepcopy(draft)  # new objects: nothing in memory
    monkeypatch.setattr(onnx_forward, "time_forwards", lambda *a, **k: pytest.fail("timed again"))
    monkeypatch.setattr(onnx_forward, "build_graph", lambda *a, **k: pytest.fail("built again"))
    kept = speculative_generate(target2, draft2, prompt, config)
    assert (onnx_forward.choice(target2), onnx_forward.choice(draft2)) == choices
    assert onnx_forward.choice(target2).kept
    assert kept.tokens == fresh.tokens and [r.accepted for r in kept.steps] == [r.accepted for r in fresh.steps]
