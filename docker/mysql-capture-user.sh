#!/bin/bash
# Runs once when the MySQL container initialises: the least-privilege capture user.
set -euo pipefail
mysql -uroot -p"${MYSQL_ROOT_PASSWORD}" <<SQL
CREATE USER 'cdc'@'%' IDENTIFIED BY '${CDC_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%';
GRANT SELECT ON shop.* TO 'cdc'@'%';
SQL
