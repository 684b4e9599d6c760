"""Settings is made of its parts only: each variable is declared by exactly one concern's
model (core/src/pdfqueue/domain/settings/), so its module is where to look for it."""

from __future__ import annotations

from collections import Counter

from pdfqueue.domain.settings import CONCERNS, Settings


def test_every_setting_is_declared_by_exactly_one_part() -> None:
    declared = Counter(name for part in CONCERNS for name in part.__annotations__)
    assert [name for name, n in declared.items() if n > 1] == []
    assert set(declared) == set(Settings.model_fields)
    assert not Settings.__annotations__.keys() - {"model_config"}


def test_a_settings_is_each_of_its_parts() -> None:
    settings = Settings()
    for part in CONCERNS:
        assert isinstance(settings, part)
        assert part.model_fields.keys() <= Settings.model_fields.keys()
