"""Series names a Prometheus text exposition (a scraped /metrics page) makes available to PromQL."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# The series a family of each type yields, beyond the samples present: a family declared by `# TYPE` but without
# samples yet (a labelled metric nobody has touched) still shows what it will be called.
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def exported_names(text: str) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names


def sampled_names(text: str) -> set[str]:
    """Only the names that carry at least one sample."""
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
