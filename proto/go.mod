module kollect.dev/proto

go 1.26.0
