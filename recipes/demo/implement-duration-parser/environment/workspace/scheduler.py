"""Prints when each job in jobs.txt runs next (example user of durations.py)."""
from durations import format_duration, parse_duration


def main(path="jobs.txt"):
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, every = line.split("=", 1)
            seconds = parse_duration(every)
            print(f"{name.strip():<12} every {format_duration(seconds):<10} ({seconds} s)")


if __name__ == "__main__":
    main()
