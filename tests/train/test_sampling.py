"""The task sampler: batches per task over an epoch for each strategy, the curriculum, several processes, and the
same plan for the same seed and epoch."""

from collections import Counter

import pytest

from pooled_models.train.data.multitask import TaskBatchSampler, task_shares

SIZES = {"big": 1000, "small": 100}  # one task with 10x the data of the other


def tasks_of(sampler, batches):
    starts = sorted((offset, name) for name, offset in sampler.offsets.items())

    def task(index):
        return [name for offset, name in starts if offset <= index][-1]

    found = []
    for batch in batches:
        names = {task(index) for index in batch}
        assert len(names) == 1, "a batch holds rows of one task"
        found.append(names.pop())
    return found


def test_proportional_is_one_pass_over_every_task():
    sampler = TaskBatchSampler(SIZES, batch_size=16, strategy="proportional")
    batches = list(sampler)
    assert len(batches) == len(sampler) == 63 + 7
    assert Counter(tasks_of(sampler, batches)) == {"big": 63, "small": 7}
    rows = sorted(index for batch in batches for index in batch)
    assert rows == list(range(1100))  # every row of every task exactly once


def test_temperature_gives_size_to_the_power_alpha():
    sampler = TaskBatchSampler(SIZES, batch_size=16, strategy="temperature", alpha=0.5)
    counts = Counter(tasks_of(sampler, list(sampler)))
    assert sum(counts.values()) == 70  # the epoch keeps its length
    # sqrt(1000) : sqrt(100) = 3.16 : 1
    assert counts == {"big": 53, "small": 17}
    assert TaskBatchSampler(SIZES, 16, "temperature", alpha=1.0).counts(0) == {
        "big": 64,
        "small": 6,
    }  # by rows
    assert TaskBatchSampler(SIZES, 16, "temperature", alpha=0.0).counts(0) == {"big": 35, "small": 35}


def test_round_robin_alternates_and_repeats_the_small_task():
    sampler = TaskBatchSampler(SIZES, batch_size=16, strategy="round_robin")
    order = tasks_of(sampler, list(sampler))
    assert order[:6] == ["big", "small"] * 3
    assert Counter(order) == {"big": 35, "small": 35}
    small_rows = [index for batch in sampler.batches(0) for index in batch if index >= 1000]
    assert len(small_rows) > 100 and set(small_rows) == set(range(1000, 1100))  # every row, several times


def test_a_curriculum_keeps_a_task_out_until_its_start_epoch():
    sampler = TaskBatchSampler(SIZES, batch_size=16, start_epochs={"big": 2})
    assert sampler.counts(0) == {"big": 0, "small": 70} == sampler.counts(1)
    assert sampler.counts(2) == {"big": 63, "small": 7}
    sampler.set_epoch(0)
    assert set(tasks_of(sampler, list(sampler))) == {"small"}
    sampler.set_epoch(2)
    assert len(list(sampler)) == 70  # every epoch has the same length, as Trainer's schedule assumes
    with pytest.raises(ValueError, match="at least one task must start in the first epoch"):
        TaskBatchSampler(SIZES, 16, start_epochs={"big": 1, "small": 1})


@pytest.mark.parametrize("strategy", ["proportional", "temperature", "round_robin"])
def test_with_two_processes_batches_come_in_pairs_of_one_task(strategy):
    sampler = TaskBatchSampler(SIZES, batch_size=16, strategy=strategy, group=2)
    order = tasks_of(sampler, list(sampler))
    assert len(order) == len(sampler) and len(order) % 2 == 0
    assert all(order[index] == order[index + 1] for index in range(0, len(order), 2))


def test_the_plan_depends_on_the_seed_and_the_epoch_only():
    first = TaskBatchSampler(SIZES, 16, "temperature", seed=3)
    again = TaskBatchSampler(SIZES, 16, "temperature", seed=3)
    assert first.batches(1) == again.batches(1)  # a resumed run draws what the uninterrupted one did
    assert first.batches(0) != first.batches(1)
    assert first.batches(0) != TaskBatchSampler(SIZES, 16, "temperature", seed=4).batches(0)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="Unknown task_sampling 'random'. Valid choices: proportional"):
        TaskBatchSampler(SIZES, 16, "random")
    with pytest.raises(ValueError, match="at least one training row"):
        TaskBatchSampler({"empty": 0}, 16)


def test_task_shares_use_largest_remainders_and_give_every_task_one():
    assert task_shares({"a": 2.0, "b": 1.0}, 10) == {"a": 7, "b": 3}
    assert task_shares({"a": 1000.0, "b": 1.0}, 10) == {"a": 9, "b": 1}
    assert sum(task_shares({"a": 1.0, "b": 1.0, "c": 1.0}, 10).values()) == 10


def real_fraction(batches, lengths_of):
    real = sum(lengths_of(index) for batch in batches for index in batch)
    computed = sum(len(batch) * max(lengths_of(index) for index in batch) for batch in batches)
    return real / computed


def test_given_lengths_batches_hold_rows_of_similar_length_and_every_row_once():
    import random

    rng = random.Random(0)
    lengths = {name: [rng.choice([4, 8, 16, 64, 256]) for _ in range(size)] for name, size in SIZES.items()}
    flat = lengths["big"] + lengths["small"]
    grouped = TaskBatchSampler(SIZES, 16, seed=1, lengths=lengths)
    plain = TaskBatchSampler(SIZES, 16, seed=1)
    batches = grouped.batches(0)
    assert sorted(index for batch in batches for index in batch) == list(range(sum(SIZES.values())))
    assert Counter(tasks_of(grouped, batches)) == Counter(tasks_of(plain, plain.batches(0)))
    assert (
        real_fraction(batches, flat.__getitem__)
        > 0.9
        > 0.5
        > real_fraction(plain.batches(0), flat.__getitem__)
    )
    assert grouped.batches(0) != grouped.batches(1)  # still random from epoch to epoch
    assert grouped.batches(1) == TaskBatchSampler(SIZES, 16, seed=1, lengths=lengths).batches(1)


def test_lengths_must_match_the_task_sizes():
    with pytest.raises(ValueError, match=r"lengths\['small'\] has 3 entries for the task's 100 rows"):
        TaskBatchSampler(SIZES, 16, lengths={"small": [1, 2, 3]})
