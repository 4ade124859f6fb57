#!/bin/bash
mkdir -p /logs/verifier
served=$(python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8080/greeting.txt", timeout=5).read().decode(), end="")')
if [ -n "$served" ] && [ "$(cat /app/greeting.txt 2>/dev/null)" = "$served" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
