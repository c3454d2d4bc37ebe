module kollect.dev/agent

go 1.26.0

replace kollect.dev/api => ../api

require github.com/go-logr/logr v1.4.4
