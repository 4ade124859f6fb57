"""Human-friendly durations such as "1h30m" or "2d 4h", used in job configs."""

UNITS = {"w": 7 * 24 * 3600, "d": 24 * 3600, "h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """Parse a duration string and return the total number of seconds (int).

    A duration is one or more groups of ``<digits><unit>``, where unit is one of
    ``w`` (weeks), ``d`` (days), ``h`` (hours), ``m`` (minutes), ``s`` (seconds).
    The number and its unit are written together; groups may be separated by
    any amount of whitespace (or none). Units are case-insensitive.

    Rules:
      * units must appear in decreasing order (w, d, h, m, s) and each at most
        once: "1h30m" is valid, "30m1h" and "1m2m" are not;
      * a string that is only digits (e.g. "45") means that many seconds;
      * leading and trailing whitespace is ignored;
      * numbers may be zero or larger than the next unit ("90m" == 5400);
      * anything else raises ``ValueError``: empty or blank string, unknown
        unit ("5y"), signs or decimals ("-5m", "1.5h"), a number without a unit
        after a group ("1h30"), a unit without a number ("h").

    Examples:
        >>> parse_duration("90s")
        90
        >>> parse_duration("1h30m")
        5400
        >>> parse_duration("2d 4h")
        187200
        >>> parse_duration("1W")
        604800
        >>> parse_duration("45")
        45
    """
    raise NotImplementedError


def format_duration(seconds):
    """Format a non-negative integer number of seconds as a compact duration.

    Uses the largest units first (w, d, h, m, s) without separators and omits
    zero components; zero is formatted as "0s". Raises ``ValueError`` for a
    negative number and ``TypeError`` for anything that is not an int (bool
    is not accepted either).

    ``parse_duration(format_duration(n)) == n`` for every valid ``n``.

    Examples:
        >>> format_duration(5400)
        '1h30m'
        >>> format_duration(694861)
        '1w1d1h1m1s'
        >>> format_duration(0)
        '0s'
    """
    raise NotImplementedError
