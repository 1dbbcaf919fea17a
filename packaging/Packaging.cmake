# Installation layout and CPack (Debian package) settings.
include(GNUInstallDirs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/experiments/ DESTINATION ${CMAKE_INSTALL_DATADIR}/routelab/experiments
        FILES_MATCHING PATTERN "*.json")
if(ROUTELAB_BUILD_GUI)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/routelab.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/io.routelab.RouteLab.metainfo.xml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
  install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/routelab.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
endif()

set(CPACK_PACKAGE_NAME "routelab")
set(CPACK_PACKAGE_VENDOR "RouteLab")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Experiment workbench for token-routing transformers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "RouteLab developers")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
include(CPack)
