"""Verifier tests for /app/stats.py (run with: python3 /tests/test_stats_hidden.py)."""
import sys
import unittest

sys.path.insert(0, "/app")

from stats import mean, median, variance  # noqa: E402


class TestMedian(unittest.TestCase):
    def test_single(self):
        self.assertEqual(median([7]), 7)

    def test_two(self):
        self.assertEqual(median([10, 20]), 15)

    def test_odd_unsorted(self):
        self.assertEqual(median([9, 1, 5, 3, 7]), 5)

    def test_even_unsorted(self):
        self.assertEqual(median([8, 2, 6, 4]), 5)

    def test_even_six(self):
        self.assertEqual(median([1, 2, 3, 4, 5, 100]), 3.5)

    def test_floats(self):
        self.assertAlmostEqual(median([0.5, 1.5, 2.5, 3.5]), 2.0)

    def test_negative(self):
        self.assertEqual(median([-5, -1, -3, -2]), -2.5)

    def test_duplicates(self):
        self.assertEqual(median([2, 2, 2, 2]), 2)

    def test_generator_input(self):
        self.assertEqual(median(x for x in [4, 1, 3, 2]), 2.5)

    def test_input_not_modified(self):
        data = [3, 1, 2, 4]
        median(data)
        self.assertEqual(data, [3, 1, 2, 4])

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])


class TestOthersUnchanged(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)
        with self.assertRaises(ValueError):
            mean([])

    def test_variance(self):
        self.assertAlmostEqual(variance([2, 4, 4, 4, 5, 5, 7, 9]), 32 / 7)
        self.assertAlmostEqual(variance([1, 3]), 2.0)
        with self.assertRaises(ValueError):
            variance([1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
