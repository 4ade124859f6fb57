# ALLOWED_HOSTS: host names the proxy lets through, space-separated (`*.example.org` for subdomains);
# unset: everything (a public phase). The trial's own network has no other way out.
set -e
conf=/tmp/tinyproxy.conf
printf 'Port 8888\nTimeout 600\nMaxClients 200\nDisableViaHeader Yes\nLogLevel Info\n' > "$conf"
if [ -n "${ALLOWED_HOSTS+set}" ]; then
  : > /tmp/allowed
  for host in $ALLOWED_HOSTS; do
    pattern=$(printf '%s' "$host" | sed -e 's/[.]/\\./g' -e 's/^\*\\\./(.*\\.)?/')
    printf '^%s$\n' "$pattern" >> /tmp/allowed
  done
  printf 'FilterDefaultDeny Yes\nFilter "/tmp/allowed"\nFilterType ere\nFilterURLs Off\n' >> "$conf"
fi
exec tinyproxy -d -c "$conf"
