#!/usr/bin/env bash
# Installs Azurite, the Azure Storage emulator (an npm package), into $1: the stand-in for Azure
# Blob Storage that the azureblob sink's tests and the sinks e2e export to. $1/azurite-blob
# starts its blob service alone (testenv.StartAzurite). Azurite declares Node.js 22 in its
# engines field and runs on the Node.js 20 this machine has (npm only warns).
set -euo pipefail
version=3.37.0
npm install --prefix "$1" --no-audit --no-fund --loglevel=error "azurite@$version" >&2
ln -s node_modules/.bin/azurite-blob "$1/azurite-blob"
