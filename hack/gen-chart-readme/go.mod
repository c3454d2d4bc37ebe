module kollect.dev/hack/gen-chart-readme

go 1.26.0
