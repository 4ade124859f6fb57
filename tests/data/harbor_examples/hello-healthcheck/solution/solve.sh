#!/bin/bash
python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8080/greeting.txt").read().decode(), end="")' > /app/greeting.txt
