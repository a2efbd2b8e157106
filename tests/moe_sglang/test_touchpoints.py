"""The touchpoint inventory matches the installed SGLang, and a moved or changed target stops the plugin clearly."""

import pytest

from moe_sglang import touchpoints
from moe_sglang.touchpoints import Touchpoint

pytestmark = pytest.mark.sglang


def test_installed_sglang_matches_the_inventory():
    assert touchpoints.problems() == []


@pytest.mark.parametrize(
    ("point", "message"),
    [
        (Touchpoint("sglang.srt.layers.moe.topk.TopK.gone", "hook", "test"), "not found"),
        (
            Touchpoint("sglang.srt.speculative.spec_registry.get_spec", "call", "test", "(name, extra)"),
            "signature is now (name), was (name, extra)",
        ),
        (
            Touchpoint("sglang.srt.speculative.ngram_worker.NGRAMWorker.no_such_field", "attribute", "test"),
            "no longer has or assigns 'no_such_field'",
        ),
    ],
)
def test_a_changed_target_stops_the_plugin_naming_it(monkeypatch, point, message):
    monkeypatch.setattr(touchpoints, "TOUCHPOINTS", (*touchpoints.TOUCHPOINTS, point))
    with pytest.raises(touchpoints.IncompatibleSGLang) as err:
        touchpoints.check_touchpoints()
    assert point.target in str(err.value.code) and message in str(err.value.code)
    assert isinstance(err.value, SystemExit), "SGLang swallows plugin exceptions, but not SystemExit"


def test_hooks_only_on_inventory_targets():
    with pytest.raises(ValueError, match="not a hook"):
        touchpoints.hook("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation", print, "around")


def test_every_hook_says_why_and_every_use_is_known():
    for point in touchpoints.TOUCHPOINTS:
        assert point.use in touchpoints.USES and point.why.strip(), point


def test_each_target_is_listed_once():
    """The inventory is looked up by target (a hook is refused unless its entry says hook): a second entry for the same
    name would silently replace the first."""
    targets = [point.target for point in touchpoints.TOUCHPOINTS]
    assert sorted(t for t in set(targets) if targets.count(t) > 1) == []
