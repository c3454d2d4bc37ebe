module kollect.dev/hack/servers/githttp

go 1.26.0
