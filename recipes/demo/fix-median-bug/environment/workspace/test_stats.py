import unittest

from stats import mean, median, variance


class TestMean(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])


class TestMedian(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_two_values(self):
        self.assertEqual(median([10, 20]), 15)

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])


class TestVariance(unittest.TestCase):
    def test_simple(self):
        self.assertAlmostEqual(variance([2, 4, 4, 4, 5, 5, 7, 9]), 32 / 7)


if __name__ == "__main__":
    unittest.main()
