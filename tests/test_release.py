"""exercises/ is exactly what nbgrader generate_assignment makes from solutions/."""

import pytest

from bertlab import release
from tests.conftest import ROOT


@pytest.mark.slow
def test_exercises_match_a_fresh_release():
    assert release.drift(ROOT) == []
