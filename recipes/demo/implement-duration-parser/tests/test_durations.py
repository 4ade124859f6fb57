"""Verifier tests for /app/durations.py (run with: python3 /tests/test_durations.py)."""
import sys
import unittest

sys.path.insert(0, "/app")

from durations import format_duration, parse_duration  # noqa: E402


class TestParse(unittest.TestCase):
    def test_valid(self):
        cases = {
            "90s": 90,
            "1h30m": 5400,
            "1h 30m": 5400,
            "2d 4h": 187200,
            "2d4h": 187200,
            "1w": 604800,
            "1W": 604800,
            "1H30M": 5400,
            "45": 45,
            "0": 0,
            "0s": 0,
            "90m": 5400,
            "  5m  ": 300,
            "1w2d3h4m5s": 788645,
            "1w 1d 1h 1m 1s": 694861,
            "1d\t2h": 93600,
            "10m   5s": 605,
            "007s": 7,
            "100000h": 360000000,
        }
        for text, want in cases.items():
            with self.subTest(text=text):
                got = parse_duration(text)
                self.assertEqual(got, want)
                self.assertIsInstance(got, int)

    def test_invalid(self):
        for text in ["", "   ", "5y", "-5m", "+5m", "1.5h", "1h30", "h", "30m1h",
                     "1m2m", "1s1m", "1d 1d", "m5", "abc", "1h-30m", "1h,30m",
                     "12 34"]:
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    parse_duration(text)


class TestFormat(unittest.TestCase):
    def test_values(self):
        cases = {0: "0s", 1: "1s", 59: "59s", 60: "1m", 61: "1m1s", 3600: "1h",
                 5400: "1h30m", 86400: "1d", 90061: "1d1h1m1s", 604800: "1w",
                 694861: "1w1d1h1m1s", 1209600 + 7200: "2w2h", 3 * 604800 + 5: "3w5s"}
        for n, want in cases.items():
            with self.subTest(n=n):
                self.assertEqual(format_duration(n), want)

    def test_errors(self):
        with self.assertRaises(ValueError):
            format_duration(-1)
        for bad in [1.5, "60", None, True]:
            with self.subTest(value=bad):
                with self.assertRaises(TypeError):
                    format_duration(bad)

    def test_roundtrip(self):
        for n in list(range(0, 4000, 7)) + [86399, 86400, 604799, 604801, 10**7 + 3]:
            self.assertEqual(parse_duration(format_duration(n)), n)


if __name__ == "__main__":
    unittest.main(verbosity=2)
