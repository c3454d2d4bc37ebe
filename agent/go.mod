module kollect.dev/agent

go 1.26.0

require kollect.dev/api v0.0.0

replace kollect.dev/api => ../api
