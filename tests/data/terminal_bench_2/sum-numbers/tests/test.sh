#!/bin/bash
# Terminal-Bench 2 style verifier: pytest, then the reward file Harbor reads.
"${PYTHON:-python3}" -m pytest -rA /tests/check_outputs.py
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
