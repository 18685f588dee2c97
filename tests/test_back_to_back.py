"""A grade right after another waits for no learner process still importing (portable path),
and for no judge still getting ready: the pool hands out the judge idle longest."""

from __future__ import annotations

from bertlab.grading import pool
from bertlab.grading.platforms import portable


class _Started:
    """Stands in for a spawned learner process: records its order, answers at once."""

    count = 0

    def __init__(self, env):
        _Started.count += 1
        self.order, self.env, self.killed, self.cwd = _Started.count, env, False, None
        self.request_w = self.answer_r = -1

    def alive(self) -> bool:
        return not self.killed

    def kill(self) -> None:
        self.killed = True

    def go(self, cwd: str) -> None:
        self.cwd = cwd


def _fresh_judge(monkeypatch, long_lived: bool) -> None:
    """This process as a new portable judge, its learner processes stand-ins."""
    monkeypatch.setattr(portable, "LearnerProcess", _Started)
    monkeypatch.setattr(portable, "_spares", [])
    monkeypatch.setattr(portable, "_spares_owner", 0)
    monkeypatch.setattr(portable, "_wanted", portable.SPARES)
    portable.expect_notebooks(None if long_lived else 0)  # as judge_process.serve starts a judge


def test_a_notebook_takes_the_oldest_spare_and_two_stay_ready(monkeypatch):
    """A judge that outlives one command (warm judges, --watch): two spares, always."""
    _fresh_judge(monkeypatch, long_lived=True)
    portable.prepare_learners()
    first, second = portable._own_spares()
    taken, *_ = portable.start_learner("/a", None)
    assert taken is first and taken.cwd == "/a"
    # the next notebook's learner is one that has imported already, not the one starting now
    again, *_ = portable.start_learner("/b", None)
    assert again is second
    assert len(portable._own_spares()) == portable.SPARES == 2
    # a learner with an environment of its own is never a spare, and leaves the spares alone
    own, *_ = portable.start_learner("/c", {"X": "1"})
    assert own.env == {"X": "1"} and own not in portable._own_spares()
    assert len(portable._own_spares()) == 2
    # a spare that died while waiting is replaced, never handed a notebook
    portable._own_spares()[0].kill()
    alive = portable._own_spares()[1]
    taken, *_ = portable.start_learner("/d", None)
    assert taken is alive


def test_a_judge_of_one_command_starts_no_spare_for_a_notebook_that_will_not_come(monkeypatch):
    """A cold command's judge starts the spare its first notebook takes, keeps as many as the
    notebooks that may follow (two at most), and stops the rest when the last one comes."""
    _fresh_judge(monkeypatch, long_lived=False)
    portable.prepare_learners()
    (first,) = portable._own_spares()
    portable.expect_notebooks(5)
    taken, *_ = portable.start_learner("/a", None)
    assert taken is first and len(portable._own_spares()) == portable.SPARES
    second, third = portable._own_spares()
    portable.expect_notebooks(1)
    taken, *_ = portable.start_learner("/b", None)
    assert taken is second and portable._own_spares() == [third] and not third.killed
    portable.expect_notebooks(0)
    taken, *_ = portable.start_learner("/c", None)
    assert taken is third and portable._own_spares() == []
    # told nothing (a pool that outlives any count): two again
    portable.expect_notebooks(None)
    portable.start_learner("/d", None)
    assert len(portable._own_spares()) == portable.SPARES


def test_a_spare_left_over_when_fewer_notebooks_follow_is_stopped(monkeypatch):
    _fresh_judge(monkeypatch, long_lived=True)
    portable.prepare_learners()
    older, newer = portable._own_spares()
    portable.expect_notebooks(0)
    taken, *_ = portable.start_learner("/a", None)
    assert taken is older and newer.killed and portable._own_spares() == []


def test_each_judge_hears_how_many_notebooks_may_follow_its_own(monkeypatch):
    judges = iter([_Judge("a"), _Judge("b")])
    workers = pool.JudgePool({})
    monkeypatch.setattr(workers, "_new_judge", lambda: next(judges))
    with workers.take() as judge:
        assert judge.more is None  # not told: any number may follow
    workers.expect(3)
    seen = []
    for _ in range(4):
        with workers.take() as judge:
            seen.append(judge.more)
    assert seen == [2, 1, 0, 0]


class _Judge:
    def __init__(self, name: str):
        self.name, self.alive, self.more = name, True, None

    def close(self) -> None:
        self.alive = False


def test_the_pool_hands_out_the_judge_idle_longest(monkeypatch):
    judges = iter([_Judge("a"), _Judge("b"), _Judge("c")])
    workers = pool.JudgePool({})
    monkeypatch.setattr(workers, "_new_judge", lambda: next(judges))
    workers.warm_up()
    workers.warm_up()
    with workers.take() as first:
        pass
    with workers.take() as second:
        pass
    with workers.take() as third:
        pass
    assert [first.name, second.name, third.name] == ["a", "b", "a"]
    third.alive = False  # it ended while idle: never handed out
    with workers.take() as fourth:
        assert fourth.name == "b"
