"""Small descriptive-statistics helpers used by the reporting scripts."""


def mean(values):
    """Arithmetic mean of an iterable of numbers."""
    data = list(values)
    if not data:
        raise ValueError("mean() of empty data")
    return sum(data) / len(data)


def median(values):
    """Median of an iterable of numbers.

    For an even number of values the median is the mean of the two middle
    values. The input does not need to be sorted and is not modified.
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("median() of empty data")
    mid = n // 2
    if n % 2 == 1:
        return data[mid]
    return (data[mid] + data[mid + 1]) / 2


def variance(values):
    """Sample variance (denominator n - 1) of an iterable of numbers."""
    data = list(values)
    if len(data) < 2:
        raise ValueError("variance() requires at least two data points")
    m = mean(data)
    return sum((x - m) ** 2 for x in data) / (len(data) - 1)
