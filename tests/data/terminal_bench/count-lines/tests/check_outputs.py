from pathlib import Path


def test_count():
    assert Path("/app/count.txt").read_text().strip() == "3"


def test_data_unchanged():
    assert Path("/app/data.txt").read_text().splitlines() == ["alpha", "beta", "gamma"]
