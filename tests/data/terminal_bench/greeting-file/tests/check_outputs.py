from pathlib import Path

GREETING = Path("/app/greeting.txt")


def test_file_exists():
    assert GREETING.is_file()


def test_file_content():
    assert GREETING.read_text().strip() == "hello, world"
