#!/bin/bash
# The tests file is check_outputs.py (not test_outputs.py) so that agentcompass's own test run skips it.
# PYTHON lets the host-run tests point at a Python that has pytest; the image's python3 has it.
"${PYTHON:-python3}" -m pytest -rA "$TEST_DIR/check_outputs.py"
