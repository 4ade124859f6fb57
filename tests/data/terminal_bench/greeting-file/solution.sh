#!/bin/bash
echo "${GREETING}, world" > /app/greeting.txt
