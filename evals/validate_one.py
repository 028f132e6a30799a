"""Load scenario files and print the first error of each (a writer's check)."""

import sys

from crashcart.evals.scenario import ScenarioError, discover, load_scenario


def main(argv: list[str]) -> int:
    bad = 0
    files = discover(argv or None)
    for path in files:
        try:
            load_scenario(path)
        except ScenarioError as e:
            bad += 1
            print(e)
    print(f"{len(files) - bad} of {len(files)} scenario files load")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
