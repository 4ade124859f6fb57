import subprocess
import sys


def run(stdin: str) -> str:
    done = subprocess.run([sys.executable, "/app/sum.py"], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_sum():
    assert run("1\n2\n3\n") == "6"


def test_empty_lines_and_negatives():
    assert run("10\n\n-4\n") == "6"
