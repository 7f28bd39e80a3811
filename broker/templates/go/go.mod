module __NAME__

go 1.26.0

require github.com/hearth-dev/hearth/sdk-go v0.0.0
__REPLACE__
