"""Where ``bertlab autograde`` grades: ``--scheduler``, else bertlab.toml's ``grade.scheduler``,
else this machine; a scheduler that is not an address in quotes is refused, named."""

from __future__ import annotations

import pytest

from bertlab import cli
from bertlab.instructor import autograde as autograde_module
from bertlab.instructor import cluster_judges
from bertlab.settings import SettingsError, grade_settings


@pytest.fixture
def asked(monkeypatch):
    """The keyword arguments ``bertlab autograde`` grades with (nothing is graded)."""
    seen = {}

    def record(root, assignments, **options):
        seen.update(options)
        return []

    monkeypatch.setattr(autograde_module, "autograde", record)
    # The addresses here name no machine: checking them is test_cluster_address's.
    monkeypatch.setattr(cluster_judges, "check_address", lambda address: None)
    return seen


def _course(tmp_path, toml: str):
    (tmp_path / "nbgrader_config.py").write_text("")
    (tmp_path / "bertlab.toml").write_text(toml)
    return tmp_path


def test_the_scheduler_comes_from_the_option_else_the_settings_else_none(tmp_path, asked):
    course = _course(tmp_path, '[grade]\nscheduler = "tcp://from-settings:8786"\n')
    assert cli.main(["autograde", "--course", str(course)]) == 0
    assert asked["scheduler"] == "tcp://from-settings:8786"
    assert cli.main(["autograde", "--course", str(course), "--scheduler", "tcp://from-option:8786"]) == 0
    assert asked["scheduler"] == "tcp://from-option:8786"
    (course / "bertlab.toml").write_text("[grade]\njobs = 2\n")
    assert cli.main(["autograde", "--course", str(course)]) == 0
    assert asked["scheduler"] is None


def test_a_scheduler_that_is_not_an_address_is_refused_named(tmp_path):
    course = _course(tmp_path, "[grade]\nscheduler = 8786\n")
    with pytest.raises(SettingsError, match=r"grade\.scheduler must be an address in quotes"):
        grade_settings(course)
