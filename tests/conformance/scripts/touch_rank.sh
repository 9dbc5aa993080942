#!/bin/sh
# torch's bin/test_script.sh, rewritten: touch $1/$RANK and say so.
FILE="$1/$RANK"
echo "creating $FILE"
touch "$FILE"
