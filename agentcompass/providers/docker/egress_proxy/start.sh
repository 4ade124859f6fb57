# ALLOWED_CLIENTS: the subnets the proxy serves (the trial's own network), space-separated; anyone else is refused.
# ALLOWED_HOSTS: host names the proxy lets through, space-separated (`*.example.org` for subdomains);
# unset: everything (a public phase). The trial's own network has no other way out.
# Tunnels (CONNECT) reach the web's ports only: an allowed host's other services are not a way out.
set -e
conf=/tmp/tinyproxy.conf
printf 'Port 8888\nTimeout 600\nMaxClients 200\nDisableViaHeader Yes\nLogLevel Info\nConnectPort 443\nConnectPort 80\n' > "$conf"
for client in $ALLOWED_CLIENTS; do
  printf 'Allow %s\n' "$client" >> "$conf"
done
[ -n "$ALLOWED_CLIENTS" ] || { echo "egress proxy: no ALLOWED_CLIENTS, refusing to serve anyone" >&2; exit 1; }
if [ -n "${ALLOWED_HOSTS+set}" ]; then
  : > /tmp/allowed
  for host in $ALLOWED_HOSTS; do
    pattern=$(printf '%s' "$host" | sed -e 's/[.]/\\./g' -e 's/^\*\\\./(.*\\.)?/')
    printf '^%s$\n' "$pattern" >> /tmp/allowed
  done
  printf 'FilterDefaultDeny Yes\nFilter "/tmp/allowed"\nFilterType ere\nFilterURLs Off\n' >> "$conf"
fi
exec tinyproxy -d -c "$conf"
