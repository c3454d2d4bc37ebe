module kollect.dev/hack/testreport

go 1.26.0
