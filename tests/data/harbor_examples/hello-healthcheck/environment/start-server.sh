# Start the web server in the background, then run the container's command (its keep-alive).
python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv/www >/tmp/server.log 2>&1 &
exec "$@"
