"""Start-up's objects are kept out of the garbage collector's full passes."""

from __future__ import annotations

import gc

from app.main import freeze_startup_objects


def test_freezing_moves_the_live_objects_out_of_the_collected_generations() -> None:
    before = gc.get_freeze_count()
    try:
        freeze_startup_objects()

        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
