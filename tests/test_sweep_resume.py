"""An interrupted sweep keeps what it finished, and --resume continues it: report files replaced whole after every
run, Ctrl-C stops with exit status 130 and says how to continue, a resumed sweep runs only what is not finished, and
a report made with other settings (or any report, without --resume) is refused before any run."""

import pytest

from pooled_models.sweep_records import write_atomically


def test_a_report_file_is_replaced_whole_or_not_at_all(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("after run 1")

    def interrupted(handle):
        handle.write(b"after run")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, interrupted)
    assert path.read_text() == "after run 1"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    write_atomically(path, lambda handle: handle.write(b"after run 2"))
    assert path.read_text() == "after run 2" and list(tmp_path.iterdir()) == [path]
